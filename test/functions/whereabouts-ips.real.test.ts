import { realTarget } from '../helpers/kube-target.ts';
import { whereaboutsScenarios } from './whereabouts-scenarios.ts';

whereaboutsScenarios('real kube-apiserver', realTarget);
